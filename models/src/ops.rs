//! Building blocks that serve inference and training alike.
//!
//! Candle's fused `rms_norm`, `softmax_last_dim` and `rope*` kernels have no backward pass:
//! gradients through them vanish silently. RMSNorm, rotary embedding and the gated activation run
//! this crate's own fused ops with hand-written backward ([`crate::fused`]) where those apply
//! (CPU, contiguous f32) and are composed of differentiable primitives elsewhere; the rest is
//! composed throughout, except that a [`Linear`] with a frozen weight skips that weight's
//! gradient.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, D, DType, Layout, Module, Result, Shape, Storage, Tensor};
use candle_nn::VarBuilder;

/// Root-mean-square norm as Qwen2 computes it: statistics in f32, scale in the input dtype.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self { weight: vb.get(size, "weight")?, eps })
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        vec![&self.weight]
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        crate::fused::norm::rms_norm(xs, &self.weight, self.eps)
    }
}

/// `y = x Wᵀ + b` over any number of leading dimensions, plus a LoRA update when one is attached.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    adapter: Option<crate::lora_adapter::LoraAdapter>,
}

impl Linear {
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get((out_dim, in_dim), "weight")?;
        let bias = if bias { Some(vb.get(out_dim, "bias")?) } else { None };
        Ok(Self { weight, bias, adapter: None })
    }

    pub fn from_parts(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self { weight, bias, adapter: None }
    }

    pub fn in_dim(&self) -> usize {
        self.weight.dims()[1]
    }

    pub fn out_dim(&self) -> usize {
        self.weight.dims()[0]
    }

    /// Weight, bias and the adapter's matrices.
    pub fn parameters(&self) -> Vec<&Tensor> {
        let mut out = vec![&self.weight];
        out.extend(self.bias.as_ref());
        if let Some(adapter) = &self.adapter {
            out.extend(adapter.matrices());
        }
        out
    }

    pub fn set_adapter(&mut self, adapter: Option<crate::lora_adapter::LoraAdapter>) {
        self.adapter = adapter;
    }

    pub fn adapter(&self) -> Option<&crate::lora_adapter::LoraAdapter> {
        self.adapter.as_ref()
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Replaces the weight by one of the same shape (an adapter merged into it).
    pub fn set_weight(&mut self, weight: Tensor) {
        debug_assert_eq!(weight.dims(), self.weight.dims());
        self.weight = weight;
    }

    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
}

impl Module for Linear {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let dims = xs.dims();
        let in_dim = dims[dims.len() - 1];
        let rows: usize = dims[..dims.len() - 1].iter().product();
        let flat = xs.reshape((rows, in_dim))?;
        let ys = if flat.track_op() && !self.weight.track_op() && (self.weight.device().is_cpu() || self.weight.device().is_cuda()) {
            flat.apply_op1(FrozenWeightMatmul { weight: self.weight.clone() })?
        } else {
            flat.matmul(&self.weight.t()?)?
        };
        let ys = match &self.bias {
            Some(b) => ys.broadcast_add(b)?,
            None => ys,
        };
        let ys = match &self.adapter {
            Some(adapter) => (ys + adapter.forward(&xs.reshape((rows, in_dim))?)?)?,
            None => ys,
        };
        let mut out_dims = dims[..dims.len() - 1].to_vec();
        out_dims.push(self.weight.dim(0)?);
        ys.reshape(out_dims)
    }
}

/// `x Wᵀ` for `x` `[rows, in]` and a weight `[out, in]` that gets no gradient (frozen under LoRA,
/// or a frozen tower). Candle's matmul backward computes the gradient of both operands, so a
/// plain matmul would also compute the frozen weight's `[in, out]` gradient (as many FLOPs as the
/// forward product) and keep it in the gradient store to the end of the backward pass; this op
/// gives `x`'s gradient only. On the CPU and CUDA (the same Candle matmul either way).
struct FrozenWeightMatmul {
    weight: Tensor,
}

impl CustomOp1 for FrozenWeightMatmul {
    fn name(&self) -> &'static str {
        "frozen-weight-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows, inner) = layout.shape().dims2()?;
        let (out, weight_inner) = self.weight.dims2()?;
        if inner != weight_inner {
            candle_core::bail!("{}: input has {inner} features, the weight {weight_inner}", self.name())
        }
        let (weight, weight_layout) = self.weight.storage_and_layout();
        let Storage::Cpu(weight) = &*weight else { candle_core::bail!("{}: the weight is not on the CPU", self.name()) };
        // Candle's own CPU matmul (the same gemm as `Tensor::matmul`) on the transposed weight view.
        let ys = storage.matmul(weight, (1, rows, out, inner), layout, &weight_layout.transpose(0, 1)?)?;
        Ok((ys, Shape::from((rows, out))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, storage: &candle_core::CudaStorage, layout: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        let (rows, inner) = layout.shape().dims2()?;
        let (out, weight_inner) = self.weight.dims2()?;
        if inner != weight_inner {
            candle_core::bail!("{}: input has {inner} features, the weight {weight_inner}", self.name())
        }
        let (weight, weight_layout) = self.weight.storage_and_layout();
        let Storage::Cuda(weight) = &*weight else { candle_core::bail!("{}: the weight is not on the GPU", self.name()) };
        // cuBLAS through Candle, as `Tensor::matmul` calls it.
        let ys = storage.matmul(weight, (1, rows, out, inner), layout, &weight_layout.transpose(0, 1)?)?;
        Ok((ys, Shape::from((rows, out))))
    }

    fn bwd(&self, _xs: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad.contiguous()?.matmul(&self.weight)?))
    }
}

/// Rotary embedding in the rotate-half convention; `cos`/`sin` broadcast against `xs`.
/// Computed in f32 like the reference, returned in the input dtype.
pub fn apply_rotary(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    crate::fused::rotary::apply_rotary(xs, cos, sin)
}

/// Softmax attention over `[.., L, D]` queries and `[.., Lk, D]` keys/values with an optional
/// additive f32 mask broadcastable to `[.., L, Lk]`. Scores and softmax run in f32.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: Option<&Tensor>) -> Result<Tensor> {
    let dtype = q.dtype();
    let scores = (q.matmul(&k.t()?)? * scale)?.to_dtype(DType::F32)?;
    let scores = match mask {
        Some(m) => scores.broadcast_add(m)?,
        None => scores,
    };
    let probs = candle_nn::ops::softmax(&scores, D::Minus1)?.to_dtype(dtype)?;
    probs.matmul(v)
}

/// `down(act(gate(x)) ⊙ up(x))`, the MLP of both Qwen2.5-VL towers.
#[derive(Debug, Clone)]
pub struct GatedMlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    act: crate::config::Activation,
}

impl GatedMlp {
    pub fn new(hidden: usize, intermediate: usize, bias: bool, act: crate::config::Activation, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            gate_proj: Linear::new(hidden, intermediate, bias, vb.pp("gate_proj"))?,
            up_proj: Linear::new(hidden, intermediate, bias, vb.pp("up_proj"))?,
            down_proj: Linear::new(intermediate, hidden, bias, vb.pp("down_proj"))?,
            act,
        })
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        [&self.gate_proj, &self.up_proj, &self.down_proj].into_iter().flat_map(Linear::parameters).collect()
    }

    pub fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        out.push((format!("{prefix}.gate_proj"), &mut self.gate_proj));
        out.push((format!("{prefix}.up_proj"), &mut self.up_proj));
        out.push((format!("{prefix}.down_proj"), &mut self.down_proj));
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let gated = crate::fused::swiglu::gated_activation(self.act, &self.gate_proj.forward(xs)?, &self.up_proj.forward(xs)?)?;
        self.down_proj.forward(&gated)
    }
}

/// LayerNorm with affine weight and bias, composed of differentiable primitives (statistics in
/// f32), like `nn.LayerNorm`.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    pub fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self { weight: vb.get(size, "weight")?, bias: vb.get(size, "bias")?, eps })
    }

    pub fn from_parts(weight: Tensor, bias: Tensor, eps: f64) -> Self {
        Self { weight, bias, eps }
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        vec![&self.weight, &self.bias]
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let dtype = xs.dtype();
        let xs = xs.to_dtype(DType::F32)?;
        let centred = xs.broadcast_sub(&xs.mean_keepdim(D::Minus1)?)?;
        let inv_std = (centred.sqr()?.mean_keepdim(D::Minus1)? + self.eps)?.sqrt()?.recip()?;
        let normed = centred.broadcast_mul(&inv_std)?;
        normed.broadcast_mul(&self.weight.to_dtype(DType::F32)?)?.broadcast_add(&self.bias.to_dtype(DType::F32)?)?.to_dtype(dtype)
    }
}
