"""Writes an F32 GGUF from a quantised one with llama.cpp's own quantizer (ftype ALL_F32)."""
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
p.allow_requantize = True
p.nthread = 2
import ctypes
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p))
print("rc", rc)
