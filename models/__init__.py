"""tsmix.models: language-model, vision and synthetic pipelines on the shared mixer core."""
