"""Token mixers, one file per family. Each module registers its mixers on import;
``tsmix.registry`` imports every module here, so a new file needs no other edit."""
