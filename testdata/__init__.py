"""Data that tests/ and bench/ both build: databases filled with known distributions
(``datakit``) and the schema-4 database of the long migration with release 5's way of migrating
it (``migrationdata``). Neither tests/ nor bench/ imports the other; both may import this."""
