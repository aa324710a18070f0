// The translation unit that builds mnemo's shared precompiled LibTorch header
// (mnemo_share_torch_pch in cmake/mnemo.cmake); it has no code of its own.
