"""What a case needs before it runs: feeds from datasets, the ONNX export, and the
reduced-precision variants."""
