"""tsmix.models: the papers' experiments on the shared mixer core.

lm/ (causal char LM, ``tsmix lm``), vision/ (patch and sequential-pixel image classification,
``tsmix vision``), tasks/ (MAD, ListOps, induction heads, ``tsmix task NAME``), synthetic/
(transport, channel selection, curved boundary); every training steps through ``loop.train_steps``.
"""
