"""Chat commands addressed to a bot (ARCHITECTURE §11.4): /help, /new, /context ..., /schedule ...

`dispatch.chat_command_handle` is routing's one entry; each command answers with one short reply in the bot's
language, starts no turn and writes no context item.
"""
