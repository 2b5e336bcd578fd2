"""What every federated simulation shares: the round loop, client sampling,
aggregation, the wire between clients and server, checkpoints and seeding."""
