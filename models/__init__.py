"""PyTorch models, tokenizer training, data, training and evaluation of attention-mt."""
