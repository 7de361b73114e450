"""Image classification over any registered mixer: patch tokens (ViT-style) or sequential pixels.

``load_images`` reads scikit-learn's 8x8 digits, MNIST IDX files or CIFAR-10 python batches;
``ImageClassifier`` embeds patches or pixels and runs a :class:`tsmix.models.nets.MixerStack`;
``run_vision`` trains and scores one model; ``tsmix vision`` is the command.
"""

from .data import Images, load_images
from .model import ImageClassifier, VisionConfig, run_vision

__all__ = ["ImageClassifier", "Images", "VisionConfig", "load_images", "run_vision"]
