"""The playground: a group chat in the console whose bots are sandbox stand-ins of real bots."""
