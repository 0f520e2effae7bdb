throw new IllegalStateException("boom")
