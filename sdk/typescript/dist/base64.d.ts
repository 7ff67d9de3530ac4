export declare function base64ToBytes(text: string): Uint8Array<ArrayBuffer>;
export declare function bytesToBase64(bytes: Uint8Array): string;
