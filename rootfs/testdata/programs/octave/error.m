error("boom");
