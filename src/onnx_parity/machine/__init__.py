"""Facts about the machine a run happens on (versions, GPUs, driver, CUDA and cuDNN libraries),
the compatibility table, and the GPU preflight that judges them."""
