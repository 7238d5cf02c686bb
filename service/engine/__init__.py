"""The torch-free core shared by serving, training and export: text, tokenizer, search."""
