"""The ``notes-cluster`` commands, one module per command or group of commands.

Layer: cluster. ``cluster.cli`` assembles them into the group; ``base`` holds what they all share
(failure handling, extras, the store check, stopping) and ``options`` the option groups several
commands take. ``lab`` holds the lab's commands, the only ones that import ``cluster.lab``.
"""
