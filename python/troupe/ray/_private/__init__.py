"""The parts of ``ray._private`` that frameworks import."""
