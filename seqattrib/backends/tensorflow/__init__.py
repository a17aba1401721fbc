"""The TensorFlow backend: Keras 3 models on the TensorFlow backend, ``tf.Module`` and callables.

``core`` (the core protocol), ``windows`` (windowed forward, fast ISM, through the Keras
reader in ``backends.keras``), ``parameters`` (parameter gradients, data attribution) and
``rescale`` (rescale gradients, DeepLIFT).
"""
