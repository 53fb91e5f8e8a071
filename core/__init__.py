"""The pure core: a graph's typed spec, its DGD rendering and parsing, validation and findings.

No database, no request, no client library: everything here is a pure function of its input,
so every app above may use it and it imports none of them."""
