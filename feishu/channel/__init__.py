"""The Feishu channel of agents' one turn pipeline: the session a message belongs to, the attachments a turn reads,
and the channel itself (prepare, stream, deliver, fail), registered in the app's ready()."""
