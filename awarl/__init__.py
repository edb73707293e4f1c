"""awarl: train search agents that answer when they can and abstain when they can't.

The core (data, protocol, metrics, rewards, verification) imports without torch; training and
in-process generation import torch lazily, inside the functions that need it.
"""

__version__ = "0.1.0"
