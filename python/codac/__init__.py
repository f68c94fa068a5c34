"""codac: Transformer blocks written as plain math in ``.coda``, compiled to
fused GEMM-plus-epilogue CUDA kernels, and called from PyTorch.

>>> import codac
>>> prog = codac.load("examples/llama3_block.coda", dims={"D": 2048, "F": 8192})
>>> layer = prog.block("llama3_layer")          # a callable on torch tensors
>>> x2, qkv = layer(attn, x0, w_o, g_ffn, w_gu, w_down, g_attn, w_qkv, pos)

``codac.nn.Block`` owns a block's weights as ``nn.Parameter``s. See
``docs/python.md``.
"""

from ._native import CodacError
from ._program import BlockFunction, Program, load
from . import nn

__all__ = ["BlockFunction", "CodacError", "Program", "load", "nn"]
