"""The one database: every table the agent keeps, its schema and migrations.

`engine.py` opens the engine and holds the ORM base every table is declared on;
`schema.py` and `migrations/` bring a database to the newest revision; each other module
is one table family with its store. `state.py` composes the families the runtime hands
around into one `StateStore`; the stores of memories, queue entries, webhook deliveries
and follow-up records open on its engine where they are used.
"""
