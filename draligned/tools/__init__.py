"""Tools the research agent can call during a run (search and page fetch over a frozen corpus)."""
