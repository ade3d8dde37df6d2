"""Streaming with AsyncLLM, written as vLLM's `examples/offline_inference/async_llm_streaming.py`
is: only `vllm` -> `minivllm` (and `v1.` dropped) in the imports. The model comes from $MODEL."""
import asyncio
import os

from minivllm import SamplingParams
from minivllm.engine.arg_utils import AsyncEngineArgs
from minivllm.engine.async_llm import AsyncLLM
from minivllm.sampling_params import RequestOutputKind


async def stream_response(engine: AsyncLLM, prompt: str, request_id: str) -> None:
    """Stream the response for a single prompt, printing each new piece of text."""
    print(f"\nPrompt: {prompt!r}")
    print("Response: ", end="", flush=True)

    # Configure sampling parameters for streaming
    sampling_params = SamplingParams(
        max_tokens=100,
        temperature=0.8,
        top_p=0.95,
        seed=42,
        output_kind=RequestOutputKind.DELTA,  # Get only new tokens each iteration
    )

    # Stream tokens from AsyncLLM
    async for output in engine.generate(
        request_id=request_id, prompt=prompt, sampling_params=sampling_params
    ):
        # Process each completion in the output
        for completion in output.outputs:
            # In DELTA mode, we get only new tokens generated since last iteration
            new_text = completion.text
            if new_text:
                print(new_text, end="", flush=True)

        # Check if generation is finished
        if output.finished:
            print(f"\nDone: {request_id}")
            break


async def main():
    # Create AsyncLLM engine with simple configuration
    engine_args = AsyncEngineArgs(model=os.environ["MODEL"], enforce_eager=True)
    engine = AsyncLLM.from_engine_args(engine_args)

    try:
        prompts = [
            "The future of artificial intelligence is",
            "In a galaxy far, far away",
            "The key to happiness is",
        ]
        for i, prompt in enumerate(prompts):
            await stream_response(engine, prompt, f"stream-example-{i}")
    finally:
        engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
