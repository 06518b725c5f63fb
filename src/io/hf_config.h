// Hugging Face config.json <-> model::LlamaConfig. The only place HF config key names appear.
// Reading takes model_type llama, qwen2 and mistral, the 4.x keys and the newer spellings
// (rope_parameters, dtype); missing optional keys take HF's defaults; missing required keys,
// inconsistent values or features the model cannot run throw Error naming the file and the key.
// Writing emits the family's 4.x keys (architectures, model_type, rope_theta, rope_scaling,
// torch_dtype, ...), sorted and indented as transformers does.
#pragma once

#include <string>

#include "model/config.h"

namespace llamatrain::io {

model::LlamaConfig read_hf_config(const std::string& path);  // a config.json file or a folder holding one
void write_hf_config(const std::string& path, const model::LlamaConfig& config, const std::string& torch_dtype);

}  // namespace llamatrain::io
