"""PyTorch eager on the same GPU, batch 1, fp32, for the bundles that torchvision also has (timing only).

Run on the device by the kit that ``benchmarks/gpu_kit.py`` writes (copied there as ``torch_ref.py``).
"""
import time

import torch
import torchvision

torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
for name, shape in [("mobilenet_v2", (1, 3, 224, 224)), ("squeezenet1_1", (1, 3, 224, 224)),
                    ("mobilenet_v3_small", (1, 3, 224, 224))]:
    model = getattr(torchvision.models, name)().eval().cuda()
    x = torch.randn(*shape, device="cuda")
    with torch.no_grad():
        for _ in range(20):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    times.sort()
    print(f"torch eager {name}: median {times[len(times) // 2] * 1e3:.4f} ms (fp32, no TF32, cudnn.benchmark)")
