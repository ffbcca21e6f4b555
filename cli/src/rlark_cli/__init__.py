"""``rlark``: the command-line client of the RLark gateway API, for people and scripts."""
