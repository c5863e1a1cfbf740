"""Where a bundle's tensors live and what that costs: plan.py places every tensor and workspace in the bundle's
three buffers (constant weights, mutable inputs/outputs, activations), report.py tells the sizes of the plan and
of the object, plot.py draws the activations' plan over the layers."""
