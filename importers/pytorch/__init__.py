"""Import PyTorch models (TorchScript archives and torch.export programs) onto the registry ops."""
