"""The proofs that the hidden tests work: the mutation harness, the isolation placements, the salt sweep."""
