"""Model inspection: summary, shapes on edges, parameters, FLOPs, memory."""
