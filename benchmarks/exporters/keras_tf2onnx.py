"""tf2onnx / Keras: Keras applications and hand-built Keras / TensorFlow models, random weights,
converted by tf2onnx (NHWC graphs, Keras RNN layers, a ``tf.while_loop`` written as ``Loop``) at
opsets 13 and 15-17, some with a dynamic batch. Built in a venv of its own (REQUIREMENTS: TensorFlow
pins numpy and protobuf apart from the project): ``python -m benchmarks.exporters.build --modules
keras_tf2onnx``."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.exporters import Model, build_each, main

EXPORTER = "tf2onnx"
# onnx 1.16: later ones need a newer ml_dtypes than TensorFlow 2.15 (the last with Keras 2 as tf.keras) allows
REQUIREMENTS = ("tensorflow-cpu==2.15.1", "tf2onnx==1.17.0", "numpy<2", "onnx==1.16.2")


def _randomise_norms(model) -> None:
    """Random BatchNormalization statistics and scales, so no layer is the identity it starts as."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for layer in model.submodules:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            gamma, beta, mean, var = (w.shape for w in layer.get_weights())
            layer.set_weights([rng.uniform(0.5, 1.5, gamma).astype("float32"),
                               rng.normal(0, 0.1, beta).astype("float32"),
                               rng.normal(0, 0.1, mean).astype("float32"),
                               rng.uniform(0.5, 1.5, var).astype("float32")])


def _keras(make_model, shape: tuple, opset: int, *, dtype: str = "float32", dynamic_batch: bool = False):
    """A writer converting the Keras model ``make_model()`` with one input named ``input``."""
    def write(path: Path) -> None:
        import tensorflow as tf
        import tf2onnx

        tf.keras.utils.set_random_seed(0)
        model = make_model()
        _randomise_norms(model)
        spec = (tf.TensorSpec(((None,) if dynamic_batch else (1,)) + tuple(shape), dtype, name="input"),)
        tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset, output_path=str(path))
    return write


def _app(name: str, size: int):
    def make():
        import tensorflow as tf

        return getattr(tf.keras.applications, name)(weights=None, input_shape=(size, size, 3), classes=1000)
    return make


def _mobilenet_v3(name: str, size: int):
    def make():
        import tensorflow as tf

        # include_preprocessing=False: the Rescaling layer is not what is studied here
        return getattr(tf.keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                                    include_preprocessing=False)
    return make


def _audio_gru():
    """Conv1D front end over 40 mel bands, two GRUs, a frame classifier (a keyword spotter)."""
    import tensorflow as tf

    L = tf.keras.layers
    x = inp = L.Input((98, 40))
    x = L.Conv1D(64, 5, strides=2, padding="same", activation="relu")(x)
    x = L.BatchNormalization()(x)
    x = L.GRU(64, return_sequences=True)(x)
    x = L.GRU(64)(x)
    x = L.Dense(12, activation="softmax")(x)
    return tf.keras.Model(inp, x)


def _text_bilstm():
    """Token ids -> embedding -> bidirectional LSTM -> dense (a sentiment classifier)."""
    import tensorflow as tf

    L = tf.keras.layers
    inp = L.Input((32,), dtype="int32")
    x = L.Embedding(2000, 64)(inp)
    x = L.Bidirectional(L.LSTM(48, return_sequences=True))(x)
    x = L.Bidirectional(L.LSTM(32))(x)
    x = L.Dense(2, activation="softmax")(x)
    return tf.keras.Model(inp, x)


def _nhwc_sepconv():
    """NHWC convolutions with BatchNorm, separable and depthwise convolutions, ReLU6, a residual add,
    an up-sampling and a concat (a small segmentation head)."""
    import tensorflow as tf

    L = tf.keras.layers
    x = inp = L.Input((96, 96, 3))
    x = L.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(x)
    x = L.BatchNormalization()(x)
    x = L.ReLU(6.0)(x)
    skip = x
    x = L.SeparableConv2D(32, 3, padding="same", use_bias=False)(x)
    x = L.BatchNormalization()(x)
    x = L.ReLU(6.0)(x)
    x = L.Add()([x, skip])
    x = L.DepthwiseConv2D(3, strides=2, padding="same")(x)
    x = L.SeparableConv2D(64, 3, padding="same", activation="relu")(x)
    x = L.UpSampling2D(2, interpolation="bilinear")(x)
    x = L.Concatenate()([x, skip])
    x = L.Conv2D(8, 1)(x)
    return tf.keras.Model(inp, L.Softmax()(x))


def _transformer():
    """A Keras transformer encoder block: MultiHeadAttention, LayerNormalization, a GELU MLP."""
    import tensorflow as tf

    L = tf.keras.layers
    x = inp = L.Input((64, 128))
    a = L.MultiHeadAttention(num_heads=4, key_dim=32)(x, x)
    x = L.LayerNormalization()(x + a)
    m = L.Dense(256, activation="gelu")(x)
    x = L.LayerNormalization()(x + L.Dense(128)(m))
    x = L.GlobalAveragePooling1D()(x)
    return tf.keras.Model(inp, L.Dense(10)(x))


def _while_rnn(opset: int, steps: int | None):
    """A tf.function whose recurrence is a ``tf.while_loop`` over time (tf2onnx writes ``Loop``); its
    trip count is the input's time dimension (``None``: symbolic in the file)."""
    def write(path: Path) -> None:
        import numpy as np
        import tensorflow as tf
        import tf2onnx

        rng = np.random.default_rng(0)
        w, u = rng.normal(0, 0.2, (24, 48)).astype("float32"), rng.normal(0, 0.2, (48, 48)).astype("float32")
        b, v = rng.normal(0, 0.1, (48,)).astype("float32"), rng.normal(0, 0.2, (48, 6)).astype("float32")

        @tf.function(input_signature=[tf.TensorSpec((1, steps, 24), tf.float32, name="input")])
        def rnn(x):  # the weights made inside the function: constants of the graph, not captured inputs
            wt, ut, bt, vt = (tf.constant(a) for a in (w, u, b, v))
            h0 = tf.zeros((tf.shape(x)[0], 48))

            def body(t, h):
                return t + 1, tf.tanh(tf.matmul(x[:, t, :], wt) + tf.matmul(h, ut) + bt)
            _, h = tf.while_loop(lambda t, h: t < tf.shape(x)[1], body, (tf.constant(0), h0))
            return tf.matmul(h, vt)

        tf2onnx.convert.from_function(rnn, input_signature=rnn.input_signature, opset=opset, output_path=str(path))
    return write


MODELS = [
    Model("tf_mobilenet_v3_small", _keras(_mobilenet_v3("MobileNetV3Small", 224), (224, 224, 3), 13,
                                          dynamic_batch=True),
          "input:1x224x224x3", "Keras application, NHWC, HardSwish as x*relu6(x+3)/6, dynamic batch, opset 13"),
    Model("tf_mobilenet_v3_large", _keras(_mobilenet_v3("MobileNetV3Large", 224), (224, 224, 3), 15),
          None, "Keras application, NHWC, opset 15"),
    Model("tf_efficientnet_b0", _keras(_app("EfficientNetB0", 224), (224, 224, 3), 17, dynamic_batch=True),
          "input:1x224x224x3", "Keras application with its Rescaling/Normalization front, swish, SE; "
                               "dynamic batch, opset 17"),
    Model("tf_resnet50_v2", _keras(_app("ResNet50V2", 160), (160, 160, 3), 13), None,
          "Keras application, pre-activation ResNet at 160x160, opset 13"),
    Model("tf_densenet121", _keras(_app("DenseNet121", 160), (160, 160, 3), 16), None,
          "Keras application, dense blocks (Concat), 160x160, opset 16"),
    Model("tf_mobilenet_v2", _keras(_app("MobileNetV2", 160), (160, 160, 3), 16, dynamic_batch=True),
          "input:1x160x160x3", "Keras application, ReLU6 as Clip, dynamic batch, opset 16"),
    Model("tf_audio_conv1d_gru", _keras(_audio_gru, (98, 40), 13, dynamic_batch=True), "input:1x98x40",
          "Conv1D + two Keras GRUs (a keyword spotter), dynamic batch, opset 13"),
    Model("tf_text_bilstm", _keras(_text_bilstm, (32,), 15, dtype="int32"), None,
          "int32 token ids, Embedding, two bidirectional Keras LSTMs, opset 15"),
    Model("tf_nhwc_sepconv", _keras(_nhwc_sepconv, (96, 96, 3), 17), None,
          "NHWC Conv2D/BatchNorm/SeparableConv2D/DepthwiseConv2D/ReLU6, bilinear up-sampling, opset 17"),
    Model("tf_transformer_block", _keras(_transformer, (64, 128), 15, dynamic_batch=True), "input:1x64x128",
          "Keras MultiHeadAttention + LayerNormalization + GELU, dynamic batch, opset 15"),
    Model("tf_while_rnn_op13", _while_rnn(13, 20), None,
          "tf.function with a tf.while_loop RNN (ONNX Loop) over 20 steps, opset 13"),
    Model("tf_while_rnn_op17", _while_rnn(17, None), "input:1x20x24",
          "tf.function with a tf.while_loop RNN (ONNX Loop), the trip count the symbolic time length, opset 17"),
]


def build(outdir: Path) -> list[dict]:
    return build_each(outdir, EXPORTER, MODELS)


if __name__ == "__main__":
    sys.exit(main(build))
