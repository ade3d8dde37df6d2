from .sampling_params import SamplingParams as SamplingParams
from .inputs.llm import TextPrompt as TextPrompt, TokensPrompt as TokensPrompt
from .request import RequestStatus as RequestStatus, Request as Request
from .core.sched.output import SchedulerOutput as SchedulerOutput, NewRequestData as NewRequestData, CachedRequestData as CachedRequestData, ModelRunnerOutput as ModelRunnerOutput, EngineCoreOutput as EngineCoreOutput, EngineCoreOutputs as EngineCoreOutputs, SchedulerStats as SchedulerStats, Logprob as Logprob, LogprobsLists as LogprobsLists
from .core.block_pool import NONE_HASH as NONE_HASH, hash_block_tokens as hash_block_tokens, get_request_block_hasher as get_request_block_hasher, KVCacheBlock as KVCacheBlock, FreeKVCacheBlockQueue as FreeKVCacheBlockQueue, BlockPool as BlockPool
from .core.kv_cache_manager import KVCacheBlocks as KVCacheBlocks, KVCacheManager as KVCacheManager
from .config import SchedulerConfig as SchedulerConfig, CacheConfig as CacheConfig
from .core.sched.scheduler import Scheduler as Scheduler
from .core.sched.request_queue import FCFSRequestQueue as FCFSRequestQueue, PriorityRequestQueue as PriorityRequestQueue, create_request_queue as create_request_queue
from .worker.gpu_input_batch import CachedRequestState as CachedRequestState, InputBatch as InputBatch, prepare_inputs as prepare_inputs
from .worker.block_table import BlockTable as BlockTable
from .sample.sampler import Sampler as Sampler
from .attention.backend import AttentionMetadata as AttentionMetadata
from .attention.selector import get_attn_backend as get_attn_backend
from .model_executor.model_loader import load_model as load_model
from .worker.gpu_model_runner import ModelRunner as ModelRunner
from .entrypoints.llm import LLM as LLM
from .engine.arg_utils import EngineArgs as EngineArgs
from .engine.core import EngineCore as EngineCore, build_engine_core as build_engine_core
from .outputs import RequestOutput as RequestOutput, CompletionOutput as CompletionOutput, RequestOutputKind as RequestOutputKind
from .engine.output_processor import OutputProcessor as OutputProcessor
from .timeline import TimelineRecorder as TimelineRecorder
from .engine.async_llm import AsyncLLM as AsyncLLM, EngineCoreProc as EngineCoreProc, EngineDeadError as EngineDeadError
from .entrypoints.openai.api_server import build_app as build_app, serve as serve
__version__: str
