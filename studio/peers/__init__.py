"""The optimizer's peers: onnxsim and onnxslim run on the same model in sandbox workers, their node counts
beside ours (``optimize --compare-peers``, the optimizer-strength benchmark). Not a pass: it only counts what
other tools make of a model (:mod:`studio.peers.compare`)."""
