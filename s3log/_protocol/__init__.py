"""The protocol, sans-IO: procedures that yield requests (``ops``) and decide on replies.

No clock, randomness, threads or store client: the drivers (``s3log._drive``) perform
what the procedures yield; ``decide`` is the commit decision table.
"""
