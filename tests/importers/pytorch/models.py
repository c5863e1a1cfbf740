"""The PyTorch models the import tests build: torchvision's classifiers written again here with the same layer
structure (torchvision does not install beside the torch these tests use) at small widths and input sizes,
a DS-CNN keyword spotter, LSTM and GRU sequence models, a U-Net, and small "op zoo" modules covering the
ops the classifiers do not use. Weights are random (seeded); BatchNorm statistics are randomised so that
folding them is tested. Each entry of ``MODELS`` is (builder, input shapes with the batch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _divisible(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvBNAct(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1, act=nn.ReLU6):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act(inplace=True))
        super().__init__(*layers)


# ---- mobilenet_v2 ------------------------------------------------------------------------------------------
class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = [ConvBNAct(cin, hidden, 1)] if expand != 1 else []
        layers += [ConvBNAct(hidden, hidden, 3, stride, groups=hidden), nn.Conv2d(hidden, cout, 1, bias=False),
                   nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, width: float = 0.25, classes: int = 10):
        super().__init__()
        settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                    [6, 320, 1, 1]]
        cin = _divisible(32 * width)
        self.last_channel = _divisible(1280 * max(1.0, width))
        features: list[nn.Module] = [ConvBNAct(3, cin, stride=2)]
        for t, c, n, s in settings:
            cout = _divisible(c * width)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNAct(cin, self.last_channel, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.last_channel, classes))

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


# ---- mobilenet_v3_small ------------------------------------------------------------------------------------
class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class V3Block(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act, stride: int):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = [ConvBNAct(cin, expanded, 1, act=act)] if expanded != cin else []
        layers.append(ConvBNAct(expanded, expanded, kernel, stride, groups=expanded, act=act))
        if se:
            layers.append(SqueezeExcitation(expanded, _divisible(expanded // 4)))
        layers.append(ConvBNAct(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result = result + x
        return result


class MobileNetV3Small(nn.Module):
    def __init__(self, width: float = 0.5, classes: int = 10):
        super().__init__()
        hs, re = nn.Hardswish, nn.ReLU
        settings = [(16, 3, 16, 16, True, re, 2), (16, 3, 72, 24, False, re, 2), (24, 3, 88, 24, False, re, 1),
                    (24, 5, 96, 40, True, hs, 2), (40, 5, 240, 40, True, hs, 1), (40, 5, 240, 40, True, hs, 1),
                    (40, 5, 120, 48, True, hs, 1), (48, 5, 144, 48, True, hs, 1), (48, 5, 288, 96, True, hs, 2),
                    (96, 5, 576, 96, True, hs, 1), (96, 5, 576, 96, True, hs, 1)]
        c = [_divisible(v * width) for v in (16,)][0]
        layers: list[nn.Module] = [ConvBNAct(3, c, 3, 2, act=hs)]
        for cin, k, exp, cout, se, act, s in settings:
            layers.append(V3Block(_divisible(cin * width), k, _divisible(exp * width), _divisible(cout * width), se,
                                  act, s))
        last = _divisible(96 * width)
        layers.append(ConvBNAct(last, 6 * last, 1, act=hs))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last, 64), nn.Hardswish(inplace=True), nn.Dropout(0.2),
                                        nn.Linear(64, classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ---- resnet18 ----------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, base: int = 8, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [base, 2 * base, 4 * base, 8 * base]
        cin = base
        for index, width in enumerate(widths):
            stride = 1 if index == 0 else 2
            setattr(self, f"layer{index + 1}", nn.Sequential(BasicBlock(cin, width, stride), BasicBlock(width, width)))
            cin = width
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---- squeezenet1_1 -----------------------------------------------------------------------------------------
class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, e1: int, e3: int):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet11(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2), nn.ReLU(inplace=True), pool, Fire(16, 4, 16, 16), Fire(32, 4, 16, 16),
            nn.MaxPool2d(3, 2, ceil_mode=True), Fire(32, 8, 32, 32), Fire(64, 8, 32, 32),
            nn.MaxPool2d(3, 2, ceil_mode=True), Fire(64, 12, 48, 48), Fire(96, 12, 48, 48), Fire(96, 16, 64, 64),
            Fire(128, 16, 64, 64))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(128, classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# ---- shufflenet_v2_x0_5 ------------------------------------------------------------------------------------
def channel_shuffle(x, groups: int):
    batch, channels, height, width = x.size()
    x = x.view(batch, groups, channels // groups, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batch, -1, height, width)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        branch = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                                         nn.Conv2d(cin, branch, 1, bias=False), nn.BatchNorm2d(branch),
                                         nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        first = cin if stride > 1 else branch
        self.branch2 = nn.Sequential(nn.Conv2d(first, branch, 1, bias=False), nn.BatchNorm2d(branch),
                                     nn.ReLU(inplace=True),
                                     nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False),
                                     nn.BatchNorm2d(branch), nn.Conv2d(branch, branch, 1, bias=False),
                                     nn.BatchNorm2d(branch), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, channels=(8, 16, 32, 64, 128), repeats=(4, 8, 4), classes: int = 10):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = channels[0]
        for index, (count, cout) in enumerate(zip(repeats, channels[1:4])):
            units = [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1) for _ in range(count - 1)]
            setattr(self, f"stage{index + 2}", nn.Sequential(*units))
            cin = cout
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[-1], 1, bias=False), nn.BatchNorm2d(channels[-1]),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[-1], classes)

    def forward(self, x):
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))


# ---- mnasnet -----------------------------------------------------------------------------------------------
class MnasResidual(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        self.apply_residual = cin == cout and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid, momentum=0.0003), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid, momentum=0.0003), nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout, momentum=0.0003))

    def forward(self, x):
        return self.layers(x) + x if self.apply_residual else self.layers(x)


def _stack(cin: int, cout: int, kernel: int, stride: int, expand: int, repeats: int) -> nn.Sequential:
    first = MnasResidual(cin, cout, kernel, stride, expand)
    return nn.Sequential(first, *[MnasResidual(cout, cout, kernel, 1, expand) for _ in range(repeats - 1)])


class MNASNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        depths = [8, 8, 8, 16, 24, 32, 48, 80, 160]
        self.layers = nn.Sequential(
            nn.Conv2d(3, depths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(depths[0]), nn.ReLU(inplace=True),
            nn.Conv2d(depths[0], depths[0], 3, 1, 1, groups=depths[0], bias=False), nn.BatchNorm2d(depths[0]),
            nn.ReLU(inplace=True), nn.Conv2d(depths[0], depths[1], 1, bias=False), nn.BatchNorm2d(depths[1]),
            _stack(depths[1], depths[2], 3, 2, 3, 3), _stack(depths[2], depths[3], 5, 2, 3, 3),
            _stack(depths[3], depths[4], 5, 2, 6, 3), _stack(depths[4], depths[5], 3, 1, 6, 2),
            _stack(depths[5], depths[6], 5, 2, 6, 4), _stack(depths[6], depths[7], 3, 1, 6, 1),
            nn.Conv2d(depths[7], 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(inplace=True))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


# ---- DS-CNN keyword spotting (MLPerf Tiny's) ---------------------------------------------------------------
class DSCNN(nn.Module):
    def __init__(self, filters: int = 32, classes: int = 12):
        super().__init__()
        self.conv = nn.Conv2d(1, filters, (10, 4), (2, 2), (5, 1))
        self.bn = nn.BatchNorm2d(filters)
        self.blocks = nn.Sequential(*[nn.Sequential(
            nn.Conv2d(filters, filters, 3, 1, 1, groups=filters), nn.BatchNorm2d(filters), nn.ReLU(),
            nn.Conv2d(filters, filters, 1), nn.BatchNorm2d(filters), nn.ReLU()) for _ in range(4)])
        self.dropout = nn.Dropout(0.4)
        self.fc = nn.Linear(filters, classes)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = self.dropout(self.blocks(x))
        x = F.avg_pool2d(x, x.shape[2:])
        return F.softmax(self.fc(torch.flatten(x, 1)), dim=1)


# ---- sequence models ---------------------------------------------------------------------------------------
class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(10, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.head(out), h, c


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(10, 12, num_layers=1, bidirectional=True, batch_first=True)
        self.head = nn.Linear(24, 4)

    def forward(self, x):
        out, h = self.rnn(x)
        return self.head(out[:, -1]), h


class TimeMajorRNN(nn.Module):
    """Time-major (batch_first False) LSTM, GRU with an initial state passed in, and a tanh RNN."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8)
        self.gru = nn.GRU(8, 8, num_layers=2)
        self.rnn = nn.RNN(8, 4)

    def forward(self, x, h0):
        y, _ = self.lstm(x)
        y, h = self.gru(y, h0)
        z, _ = self.rnn(y)
        return z, h


# ---- U-Net -------------------------------------------------------------------------------------------------
def _double(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, base: int = 8, classes: int = 3):
        super().__init__()
        self.inc = _double(3, base)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), _double(base, 2 * base))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), _double(2 * base, 4 * base))
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv1 = _double(6 * base, 2 * base)
        self.up2 = nn.ConvTranspose2d(2 * base, base, 2, stride=2)
        self.conv2 = _double(2 * base, base)
        self.outc = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        y = self.conv1(torch.cat([x2, self.up1(x3)], dim=1))
        y = self.conv2(torch.cat([x1, self.up2(y)], dim=1))
        return self.outc(y) + F.interpolate(x, scale_factor=1.0, mode="nearest")[:, :3]


# ---- op zoos: what the models above do not use -------------------------------------------------------------
class ActivationZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.prelu = nn.PReLU(4)
        self.acts = nn.ModuleList([nn.ELU(0.7), nn.SELU(), nn.GELU(), nn.GELU("tanh"), nn.SiLU(), nn.Mish(),
                                   nn.LeakyReLU(0.2), nn.Hardtanh(-0.5, 0.7), nn.Sigmoid(), nn.Tanh(), nn.ReLU6()])

    def forward(self, x):
        y = self.prelu(x)
        for act in self.acts:
            y = y + act(x)
        z = torch.clamp(x, -1.0, 2.0) + torch.sqrt(torch.abs(x) + 1) + torch.rsqrt(x * x + 1) + torch.exp(-x * x)
        z = z + torch.log(x * x + 1) + torch.pow(x, 2) - (-x) / 3 + 2 ** torch.tanh(x)
        return F.log_softmax(y + z, dim=1), torch.softmax(y - z, dim=-1), torch.amax(y, dim=(2, 3)), z.sum(1)


class NormZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(2, 8)
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.ln = nn.LayerNorm([6, 6])
        self.bn1d = nn.BatchNorm1d(8)
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        a = self.gn(x) + self.inorm(x) + self.ln(x)
        b = self.bn1d(x.flatten(2))
        return self.fc(a), b.mean(-1, keepdim=True)


class SpatialZoo(nn.Module):
    """1-D and dilated convolutions, transposed convolution, pools with ceil_mode and padding, adaptive pools,
    pads of every mode, resizes, pixel_shuffle."""

    def __init__(self):
        super().__init__()
        self.conv1d = nn.Conv1d(4, 6, 3, padding=2, dilation=2)
        self.conv = nn.Conv2d(4, 8, 3, padding="same", dilation=2, groups=2)
        self.deconv = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.deconv1d = nn.ConvTranspose1d(6, 2, 4, stride=2, padding=1)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x):
        s = self.conv1d(x.flatten(2))
        pools1d = (F.max_pool1d(s, 3, 2, ceil_mode=True), F.avg_pool1d(s, 3, 2, 1, ceil_mode=True))
        y = self.conv(x)
        pools = (F.max_pool2d(y, 3, 2, 1, ceil_mode=True), F.avg_pool2d(y, 3, 2, 1, count_include_pad=False),
                 F.avg_pool2d(y, 3, 2, 1), F.avg_pool2d(y, 2, 2, ceil_mode=True), F.adaptive_max_pool2d(y, (4, 2)),
                 F.adaptive_avg_pool2d(y, 4), F.adaptive_avg_pool1d(s, 2))
        pads = (F.pad(x, (1, 2, 0, 1)), F.pad(x, (1, 2, 0, 1), mode="reflect"),
                F.pad(x, (1, 2, 0, 1), mode="replicate"), F.pad(x, (1, 2, 0, 1), value=0.5))
        resized = (F.interpolate(x, scale_factor=2.0, mode="nearest"), F.interpolate(x, size=(16, 12), mode="bilinear"),
                   F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=True),
                   F.interpolate(x, size=(12, 4), mode="nearest"))
        return (self.deconv1d(s), *pools1d, *pools, self.deconv(y), *pads, *resized, self.shuffle(y))


class ShapeZoo(nn.Module):
    """permute, transpose, stack, split, slice, select, narrow, squeeze/unsqueeze, expand, repeat, matmul,
    bmm, addmm, embedding, scalar arithmetic with broadcasting."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 6)
        self.weight = nn.Parameter(torch.randn(6, 5))
        self.bias = nn.Parameter(torch.randn(5))

    def forward(self, x, tokens):
        a, b, c = torch.split(x, [2, 1, 3], dim=2)
        p = x.permute(0, 2, 1).transpose(1, 2)
        s = torch.stack([a[:, :, 0], b.squeeze(2), c.narrow(2, 1, 2).sum(2)], dim=1)
        e = self.embedding(tokens)
        m = torch.matmul(e, x.transpose(1, 2)) + torch.bmm(e, x.permute(0, 2, 1))
        f = torch.addmm(self.bias, x[:, 1], self.weight, beta=0.5, alpha=2.0)
        r = x.select(1, 2).unsqueeze(1).expand(-1, 3, -1) * x[:, ::2][:, :1].repeat(1, 3, 1)
        arithmetic = (torch.add(x, p, alpha=0.5) - torch.sub(p, x, alpha=2) + torch.div(x, 0.7, rounding_mode="trunc")
                      + torch.div(x, -0.3, rounding_mode="floor") + (3.0 - x) * torch.maximum(x, p))
        return s * 2 - 1, m / 4 + 1.5, f, r.reshape(x.size(0), -1), p, 10 - x // 0.5, arithmetic


class AttentionZoo(nn.Module):
    """scaled_dot_product_attention (causal, float mask, boolean mask with a scale), unflatten, unbind."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.norm = nn.LayerNorm(8)
        self.register_buffer("bias_mask", torch.randn(5, 5))
        self.register_buffer("bool_mask", (torch.rand(5, 5) > 0.3) | torch.eye(5, dtype=torch.bool))

    def forward(self, x):
        q, k, v = self.qkv(x).unflatten(-1, [3, 2, 4]).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias_mask)
        c = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bool_mask, scale=0.3)
        return self.norm((a + b + c).transpose(1, 2).flatten(2))


# builder, input shapes, input dtypes (None: float32 everywhere)
MODELS = {
    "mobilenet_v2": (MobileNetV2, [(1, 3, 32, 32)], None),
    "mobilenet_v3_small": (MobileNetV3Small, [(1, 3, 32, 32)], None),
    "resnet18": (ResNet18, [(1, 3, 32, 32)], None),
    "squeezenet1_1": (SqueezeNet11, [(1, 3, 64, 64)], None),
    "shufflenet_v2_x0_5": (ShuffleNetV2, [(1, 3, 32, 32)], None),
    "mnasnet": (MNASNet, [(1, 3, 32, 32)], None),
    "ds_cnn": (DSCNN, [(1, 1, 49, 10)], None),
    "lstm": (LSTMTagger, [(2, 7, 10)], None),
    "gru": (GRUClassifier, [(2, 7, 10)], None),
    "time_major_rnn": (TimeMajorRNN, [(5, 2, 6), (2, 2, 8)], None),
    "unet": (UNet, [(1, 3, 32, 32)], None),
    "activation_zoo": (ActivationZoo, [(1, 4, 6, 6)], None),
    "norm_zoo": (NormZoo, [(2, 8, 6, 6)], None),
    "spatial_zoo": (SpatialZoo, [(1, 4, 8, 8)], None),
    "shape_zoo": (ShapeZoo, [(2, 4, 6), (2, 4)], [None, "int64"]),
    "attention_zoo": (AttentionZoo, [(2, 5, 8)], None),
}

#: the six torchvision-style classifiers plus DS-CNN, the sequence models and the U-Net
ISSUE_MODELS = ["mobilenet_v2", "mobilenet_v3_small", "resnet18", "squeezenet1_1", "shufflenet_v2_x0_5", "mnasnet",
                "ds_cnn", "lstm", "gru", "unet"]


def build(name: str) -> nn.Module:
    """The model ``name`` with seeded random weights and random BatchNorm statistics, in eval mode."""
    torch.manual_seed(sum(map(ord, name)))
    model = MODELS[name][0]()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(module.weight, 0.5, 1.5)
            nn.init.uniform_(module.bias, -0.5, 0.5)
    return model.eval()


def example_inputs(name: str) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    _, shapes, dtypes = MODELS[name]
    inputs = []
    for shape, dtype in zip(shapes, dtypes or [None] * len(shapes)):
        if dtype == "int64":
            inputs.append(torch.randint(0, 10, shape, generator=generator))
        else:
            inputs.append(torch.randn(shape, generator=generator))
    return tuple(inputs)
