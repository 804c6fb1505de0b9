"""The command-line front: the `floe` command, the demo and the API client they share.

It sits above `services` and `pipeline` (it starts their processes), so nothing below imports it.
"""
