"""The local runtime: graphs as supervised Dynamo processes on this host (runtime.py records
intent, operator.py reconciles it, argv.py and supervisor.py run the processes)."""
