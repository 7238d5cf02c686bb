"""PyTorch checkpoint -> ONNX model bundle: graphs, parity checks, int8, manifest."""
