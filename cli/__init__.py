"""The `attention-mt` command line. Commands import their implementation lazily, so that the
serving commands work in an image without torch."""
