//! The training loss of a batch and its gradients, with the two vocabulary-sized matrices — the
//! token embedding and the LM head, `[vocab, hidden]` (311 MB each in f32 at Qwen's 151,936
//! tokens and a hidden size of 512) — differentiated here instead of by Candle's autograd.
//!
//! Candle's backward adds every gradient into a fresh zero tensor, and the gradient of a matmul
//! against a transposed weight is made transposed and then added once more into the weight's own
//! zero tensor: at the LM head three vocab-sized tensors are alive at once, at the embedding two,
//! while the whole forward graph is still held. Here the head's gradient is one matmul,
//! `dW = dZᵀ h`; the embedding's is one zero tensor into which the looked-up rows' gradients are
//! added in place; and both are made after the decoder's backward has let go of the forward
//! graph. Everything else (decoder, vision tower, connector, LoRA) is back-propagated by Candle
//! from the head input's gradient, so the parameters get exactly the gradients of
//! `loss.backward()`.

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, InplaceOp2, Layout, Tensor, Var, D};

use crate::error::Result;
use crate::ops::Linear;

/// The rows a prompt looked up in a trained embedding, as a leaf of the graph: the decoder's
/// backward stops at them and [`TrainingLoss::backward`] scatters their gradient into the matrix.
pub(crate) struct EmbeddingLeaf {
    weight: Tensor,
    ids: Tensor,
    rows: Var,
}

impl EmbeddingLeaf {
    /// `ids` `[N]` u32 → the leaf `[N, hidden]`.
    pub(crate) fn lookup(weight: &Tensor, ids: &Tensor) -> Result<Self> {
        let rows = Var::from_tensor(&weight.detach().index_select(ids, 0)?)?;
        Ok(Self { weight: weight.clone(), ids: ids.clone(), rows })
    }

    pub(crate) fn rows(&self) -> &Tensor {
        self.rows.as_tensor()
    }
}

/// The mean next-token cross-entropy of a batch, ready to be differentiated once.
pub struct TrainingLoss {
    /// Scalar f32, without a graph.
    loss: Tensor,
    head: HeadBackward,
    embedding: Option<EmbeddingLeaf>,
}

enum HeadBackward {
    /// A head without adapter or bias: its input's and weight's gradients from the log-probs.
    Direct {
        /// Decoder states of the labelled positions `[n, hidden]`, with their graph.
        chosen: Tensor,
        weight: Tensor,
        /// `[n, vocab]` f32.
        log_probs: Tensor,
        /// `[n]` u32.
        targets: Tensor,
    },
    /// Anything else through the LM head goes through Candle's autograd.
    Autograd(Tensor),
}

impl TrainingLoss {
    /// The loss of `targets` `[n]` given the labelled positions' decoder states `chosen`
    /// `[n, hidden]`, through `head`; `embedding` when the prompt's rows are a leaf.
    pub(crate) fn new(head: &Linear, chosen: Tensor, targets: &[u32], embedding: Option<EmbeddingLeaf>) -> Result<Self> {
        let device = chosen.device().clone();
        let targets = Tensor::new(targets, &device)?;
        if head.adapter().is_some() || head.bias().is_some() {
            let log_probs = log_softmax_f32(&candle_core::Module::forward(head, &chosen)?)?;
            let loss = mean_nll(&log_probs, &targets)?;
            return Ok(Self { loss: loss.detach(), head: HeadBackward::Autograd(loss), embedding });
        }
        let weight = head.weight().clone();
        let log_probs = log_softmax_f32(&chosen.detach().matmul(&weight.detach().t()?)?)?;
        let loss = mean_nll(&log_probs, &targets)?;
        Ok(Self { loss, head: HeadBackward::Direct { chosen, weight, log_probs, targets }, embedding })
    }

    /// The scalar loss (f32, no graph).
    pub fn loss(&self) -> &Tensor {
        &self.loss
    }

    /// The loss as a number (what the trainer logs and checks for finiteness before `backward`).
    pub fn value(&self) -> Result<f64> {
        Ok(self.loss.to_dtype(DType::F64)?.to_scalar::<f64>()?)
    }

    /// Gradients of `scale × loss` for every variable the loss depends on, as
    /// `(scale × loss).backward()` would give them.
    pub fn backward(self, scale: f64) -> Result<GradStore> {
        let (mut grads, head_grad) = match self.head {
            HeadBackward::Autograd(loss) => ((loss * scale)?.backward()?, None),
            HeadBackward::Direct { chosen, weight, log_probs, targets } => {
                let (n, vocab) = log_probs.dims2()?;
                let one_hot = targets.unsqueeze(1)?.broadcast_eq(&Tensor::arange(0u32, vocab as u32, log_probs.device())?.unsqueeze(0)?)?;
                // d(mean NLL)/d(logits) = (softmax − one-hot) / n.
                let logits_grad = ((log_probs.exp()? - one_hot.to_dtype(DType::F32)?)? * (scale / n as f64))?.to_dtype(weight.dtype())?;
                let chosen_values = chosen.detach();
                let chosen_grad = logits_grad.matmul(&weight.detach())?.to_dtype(chosen.dtype())?;
                // Σ chosen ⊙ g has gradient g with respect to `chosen`: Candle takes it from there.
                let grads = (chosen * chosen_grad)?.sum_all()?.backward()?;
                let head_grad = match weight.is_variable() {
                    true => {
                        let grad = logits_grad.t()?.matmul(&chosen_values.to_dtype(weight.dtype())?)?;
                        Some((weight, grad))
                    }
                    false => None,
                };
                (grads, head_grad)
            }
        };
        // The head's gradient is a fresh tensor: a tied embedding adds its rows into it in place.
        let fresh = head_grad.map(|(weight, grad)| {
            grads.insert(&weight, grad);
            weight.id()
        });
        if let Some(leaf) = self.embedding {
            let rows_grad = grads.remove(leaf.rows());
            if let Some(rows_grad) = rows_grad {
                let grad = match (grads.remove(&leaf.weight), fresh) {
                    (Some(existing), Some(id)) if id == leaf.weight.id() => add_rows(existing, &leaf.ids, &rows_grad)?,
                    (Some(existing), _) => existing.index_add(&leaf.ids, &rows_grad, 0)?,
                    (None, _) => add_rows(leaf.weight.zeros_like()?, &leaf.ids, &rows_grad)?,
                };
                grads.insert(&leaf.weight, grad);
            }
        }
        Ok(grads)
    }
}

/// How many positions of one row's `labels` a next-token loss predicts: the labelled ones
/// after the first (the first token is never a target). The denominator of the row's share of
/// [`TrainingLoss`]'s mean, and what token-weighted gradient accumulation weighs it by.
pub fn predicted_label_count(labels: &[i64]) -> usize {
    labels.iter().skip(1).filter(|&&l| l != -100).count()
}

/// Log-probabilities over the last dimension, computed in f32 whatever the logits' dtype.
pub(crate) fn log_softmax_f32(logits: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::ops::log_softmax(&logits.to_dtype(DType::F32)?, D::Minus1)?)
}

/// Mean negative log-likelihood of `targets` `[n]` under `log_probs` `[n, vocab]`.
pub(crate) fn mean_nll(log_probs: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let n = targets.dim(0)?;
    let picked = log_probs.gather(&targets.unsqueeze(1)?, 1)?;
    Ok((picked.sum_all()? / -(n as f64))?)
}

/// `matrix[ids[i]] += rows[i]`, in place where it can be (a contiguous f32 CPU matrix; callers
/// pass one no other tensor shares), else as a new tensor.
fn add_rows(matrix: Tensor, ids: &Tensor, rows: &Tensor) -> Result<Tensor> {
    let rows = rows.contiguous()?;
    if matrix.device().is_cpu() && matrix.dtype() == DType::F32 && rows.dtype() == DType::F32 && matrix.is_contiguous() {
        let ids = ids.to_vec1::<u32>()?;
        matrix.inplace_op2(&rows, &AddRows { ids })?;
        return Ok(matrix);
    }
    Ok(matrix.index_add(ids, &rows, 0)?)
}

struct AddRows {
    ids: Vec<u32>,
}

impl InplaceOp2 for AddRows {
    fn name(&self) -> &'static str {
        "add-rows"
    }

    fn cpu_fwd(&self, matrix: &mut CpuStorage, matrix_layout: &Layout, rows: &CpuStorage, rows_layout: &Layout) -> candle_core::Result<()> {
        let (CpuStorage::F32(matrix), CpuStorage::F32(rows)) = (matrix, rows) else { candle_core::bail!("{}: f32 only", self.name()) };
        let (Some((m0, m1)), Some((r0, r1))) = (matrix_layout.contiguous_offsets(), rows_layout.contiguous_offsets()) else {
            candle_core::bail!("{}: both operands must be contiguous", self.name())
        };
        let (matrix, rows) = (&mut matrix[m0..m1], &rows[r0..r1]);
        let width = matrix_layout.dims()[1];
        let vocab = matrix_layout.dims()[0];
        if rows.len() != self.ids.len() * width {
            candle_core::bail!("{}: {} ids for {} values of width {width}", self.name(), self.ids.len(), rows.len())
        }
        for (&id, row) in self.ids.iter().zip(rows.chunks_exact(width)) {
            let id = id as usize;
            if id >= vocab {
                candle_core::bail!("{}: id {id} outside {vocab} rows", self.name())
            }
            for (acc, g) in matrix[id * width..(id + 1) * width].iter_mut().zip(row) {
                *acc += g;
            }
        }
        Ok(())
    }
}
