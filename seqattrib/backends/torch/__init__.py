"""The torch backend: torch modules, Keras 3 models on the torch backend, and callables.

``core`` (the core protocol), ``gradients`` (gradients of K outputs from one graph),
``windows`` (windowed forward, fast ISM), ``parameters`` (parameter gradients, data
attribution), ``rescale`` and ``rescale_read`` (rescale gradients, DeepLIFT), and the
``torch.fx`` reader of a model's local prefix: ``graph``, with ``nodes``, ``local_ops`` and
``window_ops``.
"""
