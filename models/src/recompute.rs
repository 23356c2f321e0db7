//! Gradient checkpointing: a block whose forward pass keeps only its input, and whose backward
//! pass runs it again with the graph on.
//!
//! The block enters Candle's graph as a [`CustomOp1`] on its input. Candle records an op only
//! when its input already tracks a graph, and the blocks' own trained variables (LoRA A and B)
//! are invisible from outside the op. So when nothing upstream is trained — a frozen embedding
//! and a frozen vision tower, i.e. every visual-only LoRA run — the input is first *anchored*: a
//! copy made a variable, as transformers' `enable_input_require_grads` makes the embedding output
//! require grad for the same reason. The anchor's own gradient is never needed, so the backward
//! of an anchored block skips it.

use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Storage, Tensor, TensorId, Var};

/// Parameter gradients collected while recomputing checkpointed blocks in a backward pass.
#[derive(Debug, Clone, Default)]
pub struct RecomputedGrads(Arc<Mutex<Vec<(TensorId, Tensor)>>>);

impl RecomputedGrads {
    /// Adds the collected gradients to `grads` (the store of the outer backward) and clears them.
    pub fn merge_into(&self, grads: &mut GradStore) -> Result<()> {
        for (id, grad) in std::mem::take(&mut *self.lock()?) {
            let sum = match grads.get_id(id) {
                Some(existing) => (existing + grad)?,
                None => grad,
            };
            grads.insert_id(id, sum);
        }
        Ok(())
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Vec<(TensorId, Tensor)>>> {
        self.0.lock().map_err(|_| candle_core::Error::Msg("gradient store poisoned".into()))
    }
}

/// The block a checkpoint reruns: input → output, with the parameters it reads.
pub type Block = Arc<dyn Fn(&Tensor) -> Result<Tensor> + Send + Sync>;

/// Runs `block` on `xs` without keeping its activations. The result tracks the graph whenever
/// `params` holds a variable, whatever `xs` tracks; in the backward pass the block reruns, the
/// gradients of its variables land in `grads` and the input's gradient flows on.
pub fn checkpointed(xs: &Tensor, block: Block, params: Vec<Tensor>, grads: &RecomputedGrads) -> Result<Tensor> {
    let output = block(&xs.detach())?.detach().contiguous()?;
    let variables: Vec<Tensor> = params.into_iter().filter(Tensor::is_variable).collect();
    let input_needs_grad = xs.track_op();
    if !input_needs_grad && variables.is_empty() {
        // Nothing to train here or upstream: no graph to enter.
        return Ok(output);
    }
    let op = Recompute { block, variables, output, input_needs_grad, grads: grads.clone() };
    let input = if input_needs_grad { xs.clone() } else { Var::from_tensor(xs)?.into_inner() };
    input.apply_op1_arc(Arc::new(Box::new(op)))
}

/// A block whose forward result was computed without a graph.
struct Recompute {
    block: Block,
    variables: Vec<Tensor>,
    output: Tensor,
    /// `false` for an anchored input: its gradient is nobody's.
    input_needs_grad: bool,
    grads: RecomputedGrads,
}

impl CustomOp1 for Recompute {
    fn name(&self) -> &'static str {
        "recomputed-block"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        cpu_copy(&self.output, self.name())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, _: &candle_core::CudaStorage, _: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda_copy(&self.output, self.name())
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let input = if self.input_needs_grad { Var::from_tensor(&arg.detach())?.into_inner() } else { arg.detach() };
        let output = (self.block)(&input)?;
        let inner = (output * grad_res.detach())?.sum_all()?.backward()?;
        let mut collected = self.grads.lock()?;
        for var in &self.variables {
            if let Some(grad) = inner.get(var) {
                collected.push((var.id(), grad.clone()));
            }
        }
        Ok(if self.input_needs_grad { inner.get(&input).cloned() } else { None })
    }
}

/// A copy of `result`'s storage: the forward pass of an op (`op`) whose result was computed ahead
/// of entering the graph.
pub(crate) fn cpu_copy(result: &Tensor, op: &str) -> Result<(CpuStorage, Shape)> {
    let (storage, layout) = result.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => Ok((cpu.try_clone(layout)?, result.shape().clone())),
        _ => candle_core::bail!("{op}: its result is not on the CPU"),
    }
}

/// [`cpu_copy`] on a GPU.
#[cfg(feature = "cuda")]
pub(crate) fn cuda_copy(result: &Tensor, op: &str) -> Result<(candle_core::CudaStorage, Shape)> {
    let (storage, layout) = result.storage_and_layout();
    match &*storage {
        Storage::Cuda(cuda) => Ok((cuda.try_clone(layout)?, result.shape().clone())),
        _ => candle_core::bail!("{op}: its result is not on the GPU"),
    }
}
