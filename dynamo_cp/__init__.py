"""dynamo-cp: a command-line client for a Dynamo Control Plane's REST API.

It needs only the server's URL and an API token (``--url``/``--token``, the environment
variables DYNAMO_CP_URL/DYNAMO_CP_TOKEN, or a config file), never the server's database: it is
the one CLI for graphs and benchmarks, on CI pipelines, laptops and the server alike
(``manage.py`` keeps only what the server side alone can do). It imports nothing from the
server's code, so ``pip install`` of the project
is all it needs."""
