"""Package data: landmarks, models, GPUs, flags."""
