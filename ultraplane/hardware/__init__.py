"""Hardware and topology: what the fleet is made of.

The static topology tree (chip -> server -> rack -> UltraServer -> network levels), the hardware
profiles with their figures, the chip power model and cluster files. Nothing here knows about
jobs; every other room reads it.
"""
