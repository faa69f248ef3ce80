#pragma once

// kiln::nn: model building blocks written with kiln's ops, the models built
// from them (GPT-2, Llama-family decoders), checkpoints and generation.
// Modules hold their weights as tensors; forward() is plain op code, so it
// runs eagerly, lazily or inside jit::compile alike.

#include "kiln/nn/attention.h"
#include "kiln/nn/generate.h"
#include "kiln/nn/gpt2.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/llama.h"
#include "kiln/nn/mlp.h"
#include "kiln/nn/module.h"
#include "kiln/nn/rotary.h"
#include "kiln/nn/safetensors.h"
