"""commbench: how fast do my GPUs talk to each other, and did that just get worse?"""

__version__ = "0.1.0"
