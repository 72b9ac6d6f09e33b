"""The metrics an output is judged by over the whole output, one module each, listed once in
registry.py; base.py is the protocol every metric meets."""
