// Anchor translation unit for the shared precompiled header of <torch/torch.h>.
// Every other target reuses this PCH, so torch's headers are parsed once per build.
