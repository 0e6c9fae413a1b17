"""Reading checkpoint folders: config, safetensors weights, tokenizer. No pickle, ever."""
