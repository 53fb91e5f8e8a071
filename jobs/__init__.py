"""What every background job shares: the dispatcher that enqueues work by task name, and the
abstract job model behind operations and benchmark runs. The bottom layer: it imports no app."""
