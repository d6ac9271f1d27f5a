"""Everything the model reads that the agent writes itself: the Jinja templates in
`templates/` and the functions that fill them.

One floor above `domain` (beside `llm`, `sources`, `tools`): the renderers take finished
data (tasks, conversations, memories) and return text, and never call back up into the
agent or the context builders. The untrusted-content wrapper lives here too, so that
whatever builds a prompt marks untrusted authors' text the same way (SPEC 3).
"""
