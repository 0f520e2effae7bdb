raise RuntimeError("boom")
