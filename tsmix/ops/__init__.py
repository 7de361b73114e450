"""Math shared by mixers; each op keeps a plain reference beside its fast path."""
